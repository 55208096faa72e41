"""``python -m fedsciml bench …``: benchmarks; its one subcommand ``bench images`` (:mod:`fedsciml.cli.images`, built
and imported on first use: it loads the image stack)."""
from __future__ import annotations

from fedsciml.cli.common import help_of, lazy_commands


def add_parser(sub):
    def images(bsub):
        from fedsciml.cli import images as images_cli

        images_cli.add_parser(bsub)

    bench = sub.add_parser("bench")
    bench.set_defaults(_run=help_of("bench"))
    lazy_commands(bench, "bench_command", "{images}", [
        ("images", "image-classification aggregator benchmarks (FedAvg, FedProx, FIPA, FedFish, FisherMerge, "
                   "RegMean, FedFisher, FedBEns)", images, run_images)])


def run_images(args) -> int:
    from fedsciml.cli import images as images_cli

    return images_cli.run(args)
