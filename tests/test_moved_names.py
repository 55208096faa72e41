"""Names that moved in issue 32 say where they went: importing one from its old home is one ImportError line naming
the new home (a `from … import` of a missing name would otherwise say only "cannot import name"), and the new home
has it.  Names that never existed keep Python's own AttributeError."""
import importlib
import re
import subprocess
import sys

import pytest
import torch

import fedsciml.methods
from fedsciml.core.objective import LinearLeastSquares
from fedsciml.options import MOVED, MovedName
from fedsciml.runtime import client as runtime_client
from fedsciml.runtime.client import Client


@pytest.mark.parametrize("name", sorted(MOVED))
def test_a_configuration_imported_from_fedsciml_options_names_its_module(name):
    with pytest.raises(MovedName, match=rf"^fedsciml\.options\.{name} moved to {re.escape(MOVED[name])}\.{name} "):
        exec(f"from fedsciml.options import {name}", {})
    home = getattr(importlib.import_module(MOVED[name]), name)
    assert home is getattr(fedsciml.methods, name)  # the same object, whichever public path


@pytest.mark.parametrize("name", runtime_client._MOVED)
def test_the_local_training_names_imported_from_the_runtime_client_name_fedsciml_methods_local(name):
    with pytest.raises(MovedName, match=rf"^fedsciml\.runtime\.client\.{name} moved to "
                                        rf"fedsciml\.methods\.local\.{name} "):
        exec(f"from fedsciml.runtime.client import {name}", {})
    assert hasattr(importlib.import_module("fedsciml.methods.local"), name)


@pytest.mark.parametrize("method", sorted(runtime_client._MOVED_METHODS))
def test_a_clients_former_local_training_method_names_its_function(method):
    client = Client(0, LinearLeastSquares(torch.eye(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64)))
    with pytest.raises(AttributeError, match=rf"^Client\.{method} moved to fedsciml\.methods\.local"):
        getattr(client, method)
    function = runtime_client._MOVED_METHODS[method].split("(")[0].split()[-1]  # the function the line names
    if function.startswith("fedsciml."):
        module, _, attr = function.rpartition(".")
        assert callable(getattr(importlib.import_module(module), attr))


def test_fedsciml_methods_federated_is_one_line_naming_each_runners_factory():
    out = subprocess.run([sys.executable, "-c", "from fedsciml.methods.federated import run_gn"],
                         capture_output=True, text=True)
    line = out.stderr.strip().splitlines()[-1]
    assert out.returncode == 1 and line.startswith("fedsciml.options.MovedName: fedsciml.methods.federated was "
                                                   "removed: each federated method")
    for factory in ("fedsciml.methods.gn.gn_strategy", "fedsciml.methods.fipa.fipa_strategy",
                    "fedsciml.methods.averaging.fedavg_strategy", "fedsciml.methods.oneshot.one_shot_strategy"):
        assert factory in line
        module, _, attr = factory.rpartition(".")
        assert callable(getattr(importlib.import_module(module), attr))
    assert not hasattr(fedsciml.methods, "federated")


def test_names_that_never_existed_keep_pythons_own_errors():
    import fedsciml.options as options

    assert not hasattr(options, "NoSuchConfig") and not hasattr(runtime_client, "NoSuchName")
    with pytest.raises(ImportError, match="cannot import name 'NoSuchConfig'"):
        exec("from fedsciml.options import NoSuchConfig", {})
    client = Client(0, LinearLeastSquares(torch.eye(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64)))
    assert getattr(client, "problem", None) is None  # what the Flower node asks of any client
    with pytest.raises(AttributeError, match="^'Client' object has no attribute 'nosuch'$"):
        client.nosuch  # noqa: B018


def test_local_settings_imported_from_the_runtime_results_names_fedsciml_methods_local():
    """The local solver's settings text left the runtime with the local solver (a method's default settings)."""
    with pytest.raises(MovedName, match=r"^fedsciml\.runtime\.results\.local_settings moved to "
                                        r"fedsciml\.methods\.local\.local_settings "):
        exec("from fedsciml.runtime.results import local_settings", {})
    assert callable(importlib.import_module("fedsciml.methods.local").local_settings)
