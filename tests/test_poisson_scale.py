"""Poisson at research scale: collocation that grows with d, and the FIPA authors' d = 3 / 5 script settings."""
import json

from fedsciml.cli.main import main
from fedsciml.problems import get_problem


def test_default_collocation_grows_with_the_dimension_and_explicit_wins():
    assert [get_problem("poisson", dim=d).n_interior for d in (1, 2, 3, 5, 10)] == [400, 400, 4000, 4000, 8000]
    assert get_problem("poisson", dim=5, n_interior=300).n_interior == 300
    pb = get_problem("poisson", dim=5)
    assert pb.n_interior > pb.network().n_params  # more rows than parameters: no interpolation


def test_cli_preset_paper_takes_the_authors_poisson_settings(tmp_path):
    out = tmp_path / "r.json"
    code = main(["solve", "poisson", "--dim", "3", "--clients", "2", "--method", "fipa", "--preset", "paper",
                 "--rounds", "1", "--local-steps", "2", "--n-interior", "40", "--n-boundary", "2", "--quiet",
                 "--json", str(out)])
    assert code == 0
    o = json.loads(out.read_text())["options"]
    assert o["rank"] == 200 and o["gamma"] == 0.5 and o["local_steps"] == 2  # preset fills, explicit wins
    assert get_problem("poisson", dim=2).paper_method_options == {}  # only d = 3 and 5 have the authors' scripts
