"""``python -m fedsciml list``: the registered problems (with their presets) and methods (with the kinds of task each
applies to), and the other commands."""
from __future__ import annotations


def cmd_list(args):
    import fedsciml.engines  # noqa: F401  (the problem methods)
    import fedsciml.images  # noqa: F401  (the image methods, kind images)
    from fedsciml.problems import list_problems
    from fedsciml.runtime.driver import METHODS

    from fedsciml.problems import REGISTRY

    print("problems:")
    for name, desc in list_problems():
        print(f"  {name:20s} {desc}")
        for pname, preset in (getattr(REGISTRY[name], "presets", None) or {}).items():
            print(f"  {'':20s}   --preset {pname}: {preset.summary}")
    print("methods (the kinds of task each applies to in brackets; images: bench images):")
    for m in sorted(METHODS):
        print(f"  {m:20s} {METHODS[m].description} [{', '.join(METHODS[m].kinds)}]")
    print("other commands:")
    print("  ridge                one-shot federated ridge (python -m fedsciml ridge --help)")
    print("  bench images         image-classification aggregator benchmarks (python -m fedsciml bench images --help)")
    return 0
