"""``python -m helpers.record <name> [flags]``: every GPU recorder of the book.

The command line is :mod:`helpers.record.cli`; ``python -m helpers.record --list`` lists them.
"""

from helpers.record.cli import main

if __name__ == "__main__":
    main()
