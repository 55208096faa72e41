"""docs/pde.md's example runs as it stands (its only Python block, executed in a temporary directory)."""
import os
import re

import torch

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "pde.md")


def test_docs_pde_example_runs(tmp_path, monkeypatch):
    text = open(DOC).read()
    (code,) = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(code.strip().splitlines()) <= 30  # the page's promise: a new problem in ≤ 30 lines
    monkeypatch.chdir(tmp_path)
    ns = {"__name__": "docs_pde"}
    exec(compile(code, DOC, "exec"), ns)
    assert ns["result"].final["rel_l2"] < 1e-3
    x = ns["problem"].test_inputs()[::50]
    assert torch.equal(ns["u"](x), ns["problem"].predict(ns["result"].theta, x))  # same operations: bitwise
