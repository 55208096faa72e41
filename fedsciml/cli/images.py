"""``python -m fedsciml bench images ...`` — image-classification aggregator benchmarks."""
from __future__ import annotations


from fedsciml.images import methods as M


def add_parser(bench_subparsers):
    """``bench images``: its option flags generated from :class:`fedsciml.images.bench.BenchImagesOptions` by the
    generator ``solve`` uses (:func:`fedsciml.cli.common.add_option_flags`); the run and output flags by hand, as
    ``solve``'s."""
    from fedsciml.cli.common import THREADS_HELP, add_option_flags
    from fedsciml.images.bench import BenchImagesOptions

    p = bench_subparsers.add_parser(
        "images",
        description="Federated image classification with the federated layer's aggregators. One-shot methods: "
                    + ", ".join(M.ONE_SHOT) + ". Multi-round methods: " + ", ".join(M.MULTI_ROUND) + " (the "
                    "methods of kind images in `python -m fedsciml list`). An option that acts on nothing the run "
                    "does is refused.")
    flags = add_option_flags(p.add_argument_group("options (generated from fedsciml.images.bench.BenchImagesOptions)"),
                             {"bench images": BenchImagesOptions.specs()}, dest="iopt_", typed=False,
                             name_owners=False)
    p.set_defaults(_image_flags=flags)
    run = p.add_argument_group("run and output")
    run.add_argument("--threads", type=int, default=None, help=THREADS_HELP)
    run.add_argument("--device", default="auto", help="auto | cpu | cuda")
    import fedsciml.engines  # noqa: F401  (registers the engines with the driver)
    from fedsciml.runtime.driver import engines_for

    run.add_argument("--engine", default="local", choices=engines_for("images"),  # the driver's engine registry
                     help="who carries the clients' messages: this process, or Flower's simulation engine (one "
                          "virtual SuperNode per client; pip install \"flwr[simulation]>=1.41,<1.43\"; same numbers; default local)")
    run.add_argument("--json", default=None, metavar="FILE",
                     help="write the results JSON to FILE (an existing file is overwritten; checked before the run)")
    run.add_argument("--out", default=None, metavar="DIR",
                     help="directory for the PNG plot (created; a plot of the same name is overwritten; checked "
                          "before the run)")
    run.add_argument("--no-progress", action="store_true",
                     help="no per-client / per-round progress (-q/--quiet: errors only)")
    return p


def options_from_args(args):
    """The checked :class:`~fedsciml.images.bench.BenchImagesOptions` of the flags given (text converted once,
    by the declarations; values checked once, by the options class; messages name the flags)."""
    from fedsciml.cli.common import given_options
    from fedsciml.images.bench import BenchImagesOptions
    from fedsciml.options import cli_names

    with cli_names(getattr(args, "_image_flags", None)):
        given = given_options(args, "iopt_", BenchImagesOptions.specs(), owner=BenchImagesOptions.method)
        return BenchImagesOptions.from_options(given)


def config_from_args(args) -> tuple[M.TrainConfig, dict]:
    """``(TrainConfig, run_setting keywords)`` from the command line."""
    from fedsciml.runtime.driver import resolve_device

    opts = options_from_args(args)
    return opts.train_config(str(resolve_device(args.device))), opts.setting()


def run(args) -> int:
    from fedsciml.cli.common import CLIError, set_threads, status, write_json_collecting
    from fedsciml.images import bench
    from fedsciml.runtime.results import ResultsNotWritten, check_output_dir, check_output_file, raise_collected

    cfg, setting = config_from_args(args)
    if args.json:
        check_output_file(args.json, "--json")
    if args.out:
        check_output_dir(args.out, "--out")
    if setting["checkpoint"]:
        check_output_dir(setting["checkpoint"], "--checkpoint")
    set_threads(args.threads)
    try:
        from fedsciml.runtime.driver import ENGINE_KINDS

        run_setting = bench.run_setting if args.engine == "local" else ENGINE_KINDS[args.engine]["images"]
        # progress lines go to the log (stderr, as solve's); --no-progress or -q: none (nor the clients' training
        # progress)
        from fedsciml.runtime.history import loop_progress

        progress = not (args.quiet or args.no_progress)
        with loop_progress(progress):
            res = run_setting(cfg=cfg, progress=bench.log_progress if progress else (lambda s: None), **setting)
    except FileNotFoundError as e:  # a data file missing from --data-dir
        raise CLIError(str(e)) from None
    print()
    print(bench.table(res))
    print(f"(wall time {res['wall_s']:.0f} s)")
    failed = []  # both outputs are tried; what could not be written is reported together
    if args.json:
        write_json_collecting(res, args.json, failed)
    if args.out:
        try:
            status(f"wrote {bench.plot(res, args.out)}")
        except OSError as e:
            failed.append(ResultsNotWritten(f"--out {args.out!r}: the plot was not written ({e.strerror or e})"))
    raise_collected(failed)
    return 0
