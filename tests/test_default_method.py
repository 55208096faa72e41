"""The method a run gets where none is named is declared once (``fedsciml.runtime.registry``): the pooled
reference for one client, FIPA for several — the same for ``solve --clients K``, ``flower deploy``, the Flower
App's run config (and its pyproject.toml, which cannot import it: checked here) and ``Deployment.submit``."""
import inspect
from pathlib import Path

from fedsciml.runtime.registry import FEDERATED_METHOD, SOLO_METHOD, default_method


def test_one_client_gets_the_pooled_reference_and_several_get_fipa():
    assert (SOLO_METHOD, FEDERATED_METHOD) == ("centralized", "fipa")
    assert [default_method(k) for k in (None, 1, 2, 4)] == ["centralized", "centralized", "fipa", "fipa"]


def test_the_cli_and_flowers_defaults_are_the_registrys():
    import argparse

    import fedsciml
    from fedsciml.cli.flower_deploy import add_parser
    from fedsciml.cli.solve import _methods_to_run
    from fedsciml.engines.flower import runconfig

    assert _methods_to_run(argparse.Namespace(method=None, clients=4, compare=None)) == ["fipa"]
    assert _methods_to_run(argparse.Namespace(method=None, clients=None, compare=None)) == ["centralized"]
    sub = argparse.ArgumentParser().add_subparsers()
    deploy = add_parser(sub)
    assert deploy.get_default("method") == FEDERATED_METHOD
    from fedsciml.cli.config import _toml

    assert runconfig.job_from_run_config({"problem": "bratu", "clients": 2})["method"] == FEDERATED_METHOD
    app = Path(fedsciml.__file__).parent / "engines" / "flower" / "app" / "pyproject.toml"
    config = _toml().loads(app.read_text())["tool"]["flwr"]["app"]["config"]
    assert config["method"] == FEDERATED_METHOD  # the App's run-config default, in TOML


def test_a_deployments_submit_defaults_to_the_federated_method():
    from fedsciml.engines.flower.deploy import LocalDeployment

    for fn in (LocalDeployment.submit, LocalDeployment.run):
        assert inspect.signature(fn).parameters["method"].default == FEDERATED_METHOD
