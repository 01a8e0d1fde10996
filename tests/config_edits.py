"""A valid config with some fields changed, for the config tests (Chapter 4's loader)."""

import copy

DEL = object()  # as a value: remove that key


def edited(base: dict, **sections) -> dict:
    """``base`` with changes: ``DEL`` removes a key, a non-dict value replaces the whole section."""
    out = copy.deepcopy(base)
    for section, changes in sections.items():
        if not isinstance(changes, dict):
            out[section] = changes
            continue
        out.setdefault(section, {})
        for key, value in changes.items():
            if value is DEL:
                out[section].pop(key, None)
            else:
                out[section][key] = value
    return out
