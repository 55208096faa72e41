"""Typed options of the image methods, declared once (:func:`fedsciml.options.option`).

* :class:`ImageConfig` — what one run of an image method takes through the one driver
  (:func:`fedsciml.runtime.driver.plan`): the protocol, the round loop's options and the clients' training
  recipe (:class:`fedsciml.images.methods.TrainConfig`, the plain struct sent to the clients with each request).
* :class:`BenchImagesOptions` — every option of ``python -m fedsciml bench images``; the command's flags, their
  help, ranges and choices are generated from these declarations by the generator ``solve`` uses
  (:func:`fedsciml.cli.common.add_option_flags`), and the checks that an option acts on the run are its
  :meth:`~BenchImagesOptions.inapplicable`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from fedsciml.options import PATH, MethodConfig, OptionError, OptionTypeError, display, option

PROTOCOLS = ("one-shot", "rounds")  # of one method's run; bench images adds warmup-refine (a warm-up, then rounds)


@dataclass(frozen=True)
class ImageConfig(MethodConfig):
    """One image method's run on the round loop.  ``rounds=None``: one round for the one-shot protocol (the
    strategy is done after it), 15 for ``rounds``; ``train=None``: the default :class:`TrainConfig`."""

    method: ClassVar[str] = "images"

    protocol: str = option("one-shot", "one-shot (every client trains once from the shared initialization, one "
                                       "merge) or rounds (multi-round)", str, choices=PROTOCOLS)
    rounds: int | None = option(None, "communication rounds", int, lo=0,
                                none="one-shot: one round; rounds: 15")
    dropout: float = option(0.0, "probability that a sampled client fails to answer", float, lo=0, hi=1,
                            hi_open=True)
    checkpoint: str | None = option(None, "directory for per-round checkpoints (protocol rounds)", PATH,
                                    none="no checkpoints", metavar="DIR")
    resume: bool = option(False, "resume from the checkpoint in --checkpoint", bool)
    transport: str = option("local", "how requests reach the clients: local or bytes (every request and reply "
                                     "round-tripped through bytes)", str, choices=("local", "bytes"))
    train: Any = option(None, "the clients' training recipe (fedsciml.images.methods.TrainConfig)", object,
                        none="TrainConfig()", cli=False)

    def forms_jacobians(self) -> bool:
        return False

    def _resolve(self):
        from fedsciml.images.methods import TrainConfig

        if self.train is None:
            self._set("train", TrainConfig())
        elif not isinstance(self.train, TrainConfig):
            raise OptionTypeError(f"images option train must be a TrainConfig, got {type(self.train).__name__}")
        if self.rounds is None and self.protocol == "rounds":
            self._set("rounds", 15)
        if self.protocol == "one-shot" and self.rounds not in (None, 1):
            raise OptionError(f"a one-shot image method has a single round; {display('rounds')}={self.rounds} "
                              "applies to protocol rounds")
        if self.protocol == "one-shot" and self.checkpoint:
            raise OptionError(f"{display('checkpoint')}/{display('resume')} apply to the multi-round protocols "
                              "(a one-shot method has a single round)")
        if self.resume and not self.checkpoint:
            raise OptionError(f"{display('resume')} needs {display('checkpoint')} DIR (the directory the "
                              "interrupted run wrote)")
