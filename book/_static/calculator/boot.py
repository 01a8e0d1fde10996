# Started by calculator.js in Pyodide (and by tests/test_calculator.py in a bare CPython): puts the
# book's helpers.zip on the path and answers the page with helpers.cost.web.calculate. torch and
# numpy are not in the browser; a few modules the cost model imports import them for functions the
# calculator never calls, so here they are empty modules whose every attribute raises.
import importlib.abc
import importlib.machinery
import json
import sys
import types

ABSENT = ("torch", "numpy")


class NotInTheBrowser(AttributeError):
    pass


class _Absent(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise NotInTheBrowser(f"{self.__name__}.{name}: {self.__name__} is not in the browser")


class _AbsentFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ABSENT:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return _Absent(spec.name)

    def exec_module(self, module):
        module.__path__ = []


def start(zip_path):
    """Import helpers.cost.web from ``zip_path``; return the page's entry points."""
    sys.meta_path.insert(0, _AbsentFinder())
    sys.path.insert(0, zip_path)
    from helpers.cost import web

    def calculate(text):
        return json.dumps(web.calculate(json.loads(text)))

    def hardware():
        return json.dumps(web.hardware_presets())

    return calculate, hardware
