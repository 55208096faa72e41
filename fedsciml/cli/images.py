"""``python -m fedsciml bench images ...`` — image-classification aggregator benchmarks."""
from __future__ import annotations

import argparse
import math
import os

from fedsciml.images import methods as M
from fedsciml.images.data import DATASETS
from fedsciml.images.models import MODELS


def add_parser(bench_subparsers):
    p = bench_subparsers.add_parser(
        "images", help="image-classification aggregator benchmarks (FedAvg, FedProx, FIPA, FedFish, "
                       "FisherMerge, RegMean, FedFisher, FedBEns)",
        description="Federated image classification with the federated layer's aggregators. One-shot methods: "
                    + ", ".join(M.ONE_SHOT) + ". Multi-round methods: " + ", ".join(M.MULTI_ROUND) + ".",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--dataset", default="digits", choices=DATASETS)
    p.add_argument("--data-dir", default=None, help="directory with CIFAR pickle batches or Fashion-MNIST IDX files "
                                                    "(cifar10, cifar100, fmnist; digits is bundled with scikit-learn)")
    p.add_argument("--model", default=None, choices=sorted(MODELS),
                   help="network (default: lenet5 for one-shot, cnn23k for multi-round)")
    p.add_argument("--clients", type=int, default=None, help="number of clients (default 5 one-shot, 20 otherwise)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--alpha", type=float, default=0.1, help="Dirichlet label-split concentration")
    g.add_argument("--iid", action="store_true", help="IID split instead of Dirichlet")
    p.add_argument("--split", default="balanced", choices=["balanced", "hsu"],
                   help="balanced client sizes (FedRCL) or the plain Hsu et al. Dirichlet split")
    p.add_argument("--protocol", default="one-shot", choices=["one-shot", "warmup-refine", "rounds"])
    p.add_argument("--methods", default=None, help="comma-separated list (default: all but fedbens-diag/-diagfull "
                                                    "for one-shot; fedavg,fedprox,fipa,fipa-fc,fedfish otherwise)")
    p.add_argument("--seeds", type=int, default=1, help="number of seeds (0..S-1)")
    p.add_argument("--epochs", type=int, default=None, help="local epochs (default 30 one-shot, 2 multi-round)")
    p.add_argument("--lr", type=float, default=None,
                   help="client SGD learning rate, momentum 0.9, batch 64 (default 0.01 one-shot, 0.05 multi-round)")
    p.add_argument("--rounds", type=int, default=15, help="(refinement) rounds")
    p.add_argument("--warmup", type=int, default=30, help="FedAvg warm-up rounds for warmup-refine")
    p.add_argument("--participation", type=float, default=1.0, help="fraction of clients per round")
    p.add_argument("--dropout", type=float, default=0.0,
                   help="probability that a sampled client fails to answer (a round, or the one-shot exchange)")
    p.add_argument("--checkpoint", default=None, metavar="DIR",
                   help="multi-round protocols: write each run's state after every round to "
                        "DIR/seed{S}/{method}/state.pt (checksummed, loaded without running code; as solve)")
    p.add_argument("--resume", action="store_true",
                   help="continue each run from its checkpoint in --checkpoint DIR (a finished run is not repeated)")
    p.add_argument("--rank", type=int, default=10, help="FIPA: eigenpairs per client")
    p.add_argument("--beta", type=float, default=0.0,
                   help="FIPA: extra QR-merge regularization, relative: beta · max_m (N_m/N) λ_max,m")
    p.add_argument("--no-tail", action="store_true",
                   help="FIPA: plain Eq. 13 (no isotropic tail floor τ_m = λ_r,m, no complement step; needs --beta > 0)")
    p.add_argument("--server-opt", default="default", metavar="OPT",
                   help="server optimizer of multi-round fedavg and fedfish: default (fedavg plain average, fedfish "
                        "server Adam), avg (both add their merged delta), adam (both use it as the pseudo-gradient "
                        "of a server Adam, lr 0.01)")
    p.add_argument("--gamma", type=float, default=1.0, help="FIPA: server step γ")
    p.add_argument("--modes", type=int, default=5, help="FedBEns: mixture components M per client")
    p.add_argument("--fedfisher-start", default="samples", choices=["samples", "uniform"],
                   help="FedFisher: start of the server Adam — samples (default): the sample-weighted average "
                        "Σ(n_i/N)w_i; uniform: the plain mean (1/K)Σw_i of the paper's Algorithm 1")
    from fedsciml.cli.common import THREADS_HELP

    p.add_argument("--threads", type=int, default=None, help=THREADS_HELP)
    p.add_argument("--device", default="auto", help="auto | cpu | cuda")
    p.add_argument("--engine", default="local", choices=["local", "flower"],
                   help="who carries the clients' messages: this process, or Flower's simulation engine (one "
                        "virtual SuperNode per client; pip install \"fedsciml[flower]\"; same numbers; default local)")
    p.add_argument("--json", default=None, metavar="FILE",
                   help="write the results JSON to FILE (an existing file is overwritten; checked before the run)")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="directory for the PNG plot (created; a plot of the same name is overwritten; checked before "
                        "the run)")
    p.add_argument("--quiet", action="store_true", help="no per-client / per-round progress")
    return p


def config_from_args(args) -> tuple[M.TrainConfig, dict]:
    from fedsciml.runtime.driver import resolve_device

    one_shot = args.protocol == "one-shot"
    for name, v, ok, allowed in (("lr", args.lr, lambda x: x > 0, "> 0"), ("beta", args.beta, lambda x: x >= 0, "≥ 0"),
                                 ("gamma", args.gamma, lambda x: x > 0, "> 0"),
                                 ("alpha", None if args.iid else args.alpha, lambda x: x > 0, "> 0"),
                                 ("participation", args.participation, lambda x: x <= 1 and x > 0, "in (0, 1]")):
        if v is not None and not (math.isfinite(v) and ok(v)):
            raise ValueError(f"--{name} must be a finite number {allowed}, got {v}")
    if args.server_opt not in M.SERVER_OPTS:
        raise ValueError(f"--server-opt must be one of {', '.join(M.SERVER_OPTS)}, got {args.server_opt!r}")
    if args.dataset == "digits" and args.data_dir is not None:
        raise ValueError("--data-dir applies to cifar10, cifar100 and fmnist; digits is bundled with scikit-learn")
    if args.dataset != "digits":
        if not args.data_dir:
            raise ValueError(f"dataset {args.dataset!r} needs --data-dir (a local directory with the files; "
                             "nothing is downloaded)")
        if not os.path.isdir(args.data_dir):
            raise ValueError(f"--data-dir {args.data_dir!r} is not an existing directory")
    cfg = M.TrainConfig(epochs=args.epochs if args.epochs is not None else (30 if one_shot else 2),
                        rank=args.rank, beta=args.beta, gamma=args.gamma, tail=not args.no_tail,
                        modes=args.modes, server_opt=args.server_opt, fedfisher_start=args.fedfisher_start,
                        device=str(resolve_device(args.device)))
    cfg.lr = args.lr if args.lr is not None else (0.01 if one_shot else 0.05)
    for name, v in (("clients", args.clients), ("seeds", args.seeds), ("rounds", args.rounds),
                    ("epochs", cfg.epochs), ("modes", args.modes), ("rank", args.rank)):
        if v is not None and v < 1:
            raise ValueError(f"--{name} must be ≥ 1, got {v}")
    if not 0.0 <= args.dropout < 1.0:
        raise ValueError(f"--dropout must be in [0, 1), got {args.dropout}")
    if args.warmup < 0:
        raise ValueError(f"--warmup must be ≥ 0, got {args.warmup}")
    if args.resume and not args.checkpoint:
        raise ValueError("--resume needs --checkpoint DIR (the directory the interrupted run wrote)")
    if one_shot and args.checkpoint:
        raise ValueError("--checkpoint/--resume apply to --protocol rounds and warmup-refine (a one-shot method "
                         "has a single round)")
    methods = None
    if args.methods is not None:
        methods = [m.strip() for m in args.methods.split(",") if m.strip()]
        allowed = M.ONE_SHOT if one_shot else M.MULTI_ROUND
        if not methods:  # an empty list is a mistake, not "the default set"
            raise ValueError(f"--methods is empty; give a comma-separated list from {list(allowed)} "
                             "(or leave --methods out for the default set)")
        for m in methods:  # from the one registry: a method of another kind or protocol is refused in one line
            M.image_method(m, args.protocol)
    ran = methods if methods is not None else M.default_methods(args.protocol)
    fipa = [m for m in ran if m.startswith("fipa")]
    # options given (not their defaults) that act on nothing this run does: refused, one line (as solve's are)
    idle = [("--fedfisher-start", args.fedfisher_start != "samples", any(m.startswith("fedfisher") for m in ran),
             "the start of FedFisher's server Adam (fedfisher-diag, fedfisher-kfac)"),
            ("--modes", args.modes != 5, any(m.startswith("fedbens") for m in ran), "FedBEns's modes per client"),
            ("--rank", args.rank != 10, bool(fipa), "FIPA's eigenpairs per client (fipa, fipa-fc)"),
            ("--beta", args.beta != 0.0, bool(fipa), "FIPA's merge regularization (fipa, fipa-fc)"),
            ("--gamma", args.gamma != 1.0, bool(fipa), "FIPA's server step (fipa, fipa-fc)"),
            ("--no-tail", args.no_tail, bool(fipa), "FIPA's plain Eq. 13 (fipa, fipa-fc)"),
            ("--server-opt", args.server_opt != "default", not one_shot and any(m in ("fedavg", "fedfish")
                                                                                 for m in ran),
             "the server rule of multi-round fedavg and fedfish"),
            ("--warmup", args.warmup != 30, args.protocol == "warmup-refine", "the warm-up of --protocol warmup-refine"),
            ("--rounds", args.rounds != 15, not one_shot, "the rounds of a multi-round protocol")]
    for flag, given, acts, what in idle:
        if given and not acts:
            raise ValueError(f"{flag} has no effect here: it is {what}, which this run "
                             f"(--protocol {args.protocol}, methods {','.join(ran)}) does not include")
    setting = dict(dataset=args.dataset, data_dir=args.data_dir,
                   model=args.model or ("lenet5" if one_shot else "cnn23k"),
                   clients=args.clients or (5 if one_shot else 20), alpha=None if args.iid else args.alpha,
                   split_kind=args.split, protocol=args.protocol, methods=methods, seeds=tuple(range(args.seeds)),
                   rounds=args.rounds, warmup=args.warmup, participation=args.participation, dropout=args.dropout,
                   checkpoint=args.checkpoint, resume=args.resume)
    return cfg, setting


def run(args) -> int:
    from fedsciml.cli.common import CLIError, set_threads
    from fedsciml.images import bench
    from fedsciml.runtime.results import (ResultsNotWritten, check_output_dir, check_output_file, raise_collected,
                                          write_json)

    cfg, setting = config_from_args(args)
    if args.json:
        check_output_file(args.json, "--json")
    if args.out:
        check_output_dir(args.out, "--out")
    if args.checkpoint:
        check_output_dir(args.checkpoint, "--checkpoint")
    set_threads(args.threads, quiet=args.quiet)
    try:
        run_setting = bench.run_setting
        if args.engine == "flower":
            from fedsciml.engines.flower import require_flower
            from fedsciml.engines.flower.images import run_setting

            require_flower()
        res = run_setting(cfg=cfg, progress=(lambda s: None) if args.quiet else (lambda s: print(s, flush=True)),
                          **setting)
    except FileNotFoundError as e:  # a data file missing from --data-dir
        raise CLIError(str(e)) from None
    print()
    print(bench.table(res))
    print(f"(wall time {res['wall_s']:.0f} s)")
    failed = []  # both outputs are tried; what could not be written is reported together
    if args.json:
        try:
            write_json(res, args.json)
            print(f"wrote {args.json}")
        except ResultsNotWritten as e:
            failed.append(e)
    if args.out:
        try:
            print(f"wrote {bench.plot(res, args.out)}")
        except OSError as e:
            failed.append(ResultsNotWritten(f"--out {args.out!r}: the plot was not written ({e.strerror or e})"))
    raise_collected(failed)
    return 0
