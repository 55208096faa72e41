"""``python -m fedsciml flower …``: fedsciml's Flower Apps in this installation — ``flower app-dir`` (where they are,
for ``flwr run DIR``), ``flower run`` (``flwr run`` followed to the run's end, exit 1 when it fails) and ``flower
deploy`` (:mod:`fedsciml.cli.flower_deploy`): the parser (:func:`add_parser`) and the run of each."""
from __future__ import annotations

import os

from fedsciml.cli.common import CLIError, help_of, positive_seconds


def add_parser(sub):
    fl = sub.add_parser("flower")
    fl.set_defaults(_run=help_of("flower"))
    fsub = fl.add_subparsers(dest="flower_command", metavar="{app-dir,run,deploy}")
    ad = fsub.add_parser("app-dir", help="print the directory of fedsciml's Flower App, for `flwr run DIR …`")
    ad.set_defaults(_run=cmd_flower_app_dir)
    ad.add_argument("--secagg", action="store_true", help="the SecAgg+ App (central DP one-shot) instead")
    ad.add_argument("--all", action="store_true", help="every App, one 'name<TAB>directory' line each")
    fr = fsub.add_parser("run", help="flwr run an App and follow it to its end: exit 1 with Flower's reason when the "
                                     "run fails (flwr run --stream exits 0 whatever happens to the run)")
    fr.set_defaults(_run=cmd_flower_run)
    fr.add_argument("app", metavar="APP", help="the App's directory, or 'app' / 'secagg' (fedsciml's Apps)")
    fr.add_argument("superlink", metavar="SUPERLINK", nargs="?", default=None,
                    help="a SuperLink connection of $FLWR_HOME/config.toml (default: its default)")
    fr.add_argument("--run-config", "-c", action="append", default=[], metavar="CONFIG",
                    help="flwr run's --run-config, passed as given (repeatable)")
    fr.add_argument("--federation-config", action="append", default=[], metavar="CONFIG",
                    help="flwr run's --federation-config, passed as given (repeatable)")
    fr.add_argument("--federation", default=None, help="flwr run's --federation")
    fr.add_argument("--no-stream", action="store_true", help="do not show the run's log (flwr log --stream)")
    fr.add_argument("--timeout", type=positive_seconds, default=None, metavar="SECONDS",
                    help="stop waiting after this many seconds (exit 1; the run goes on: flwr stop ends it)")
    from fedsciml.cli import flower_deploy

    flower_deploy.add_parser(fsub).set_defaults(_run=flower_deploy.run)


def cmd_flower_app_dir(args) -> int:
    """``flower app-dir``: where this installation keeps its Flower App(s) (a path for ``flwr run``)."""
    from fedsciml.engines.flower.jobs import app_dirs

    dirs = app_dirs()
    if args.all:
        for name, d in dirs.items():
            print(f"{name}\t{d}")
    else:
        print(dirs["secagg" if args.secagg else "app"])
    return 0


def cmd_flower_run(args) -> int:
    """``flower run APP [SUPERLINK] …``: ``flwr run``, followed to the run's end; exit 1 with Flower's reason when
    the run did not finish ``completed`` (:mod:`fedsciml.engines.flower.launch`)."""
    from fedsciml.engines.flower.jobs import app_dirs
    from fedsciml.engines.flower.launch import flower_run

    apps = app_dirs()
    app = apps.get(args.app, args.app)  # 'app' / 'secagg': this installation's Apps by name
    if not os.path.isdir(app):
        raise CLIError(f"flower run: APP {args.app!r} is neither a directory nor one of fedsciml's Apps "
                       f"({', '.join(apps)})")
    rec = flower_run(app, args.superlink, run_config=args.run_config, federation_config=args.federation_config,
                     federation=args.federation, stream=not args.no_stream, timeout_s=args.timeout)
    print(f"Flower run {rec.get('run-id')} {rec['status']}")
    return 0
