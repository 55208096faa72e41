"""Benchmark driver shared by ``python -m fedsciml bench images`` and ``scripts/bench/bench_images.py`` and
``scripts/papers/fipa/bench_images_refine.py``:
runs a protocol over seeds, aggregates mean ± std, prints a table, writes JSON and a PNG."""
from __future__ import annotations

import dataclasses
import math
import os
import time

import torch

from fedsciml.images import data as imdata
from fedsciml.images import methods as M
from fedsciml.runtime.results import Result, format_table


def summarize(per_seed: list[dict]) -> dict:
    """``{method: {acc_mean, acc_std, best_mean, best_std, avg_mean, floats, client_s, server_s, history}}``."""
    out = {}
    for meth in per_seed[0]:
        rs = [d[meth] for d in per_seed]

        def ms(vals):
            m = sum(vals) / len(vals)
            sd = math.sqrt(sum((v - m) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else 0.0
            return m, sd
        acc, acc_sd = ms([r.accuracy for r in rs])
        best, best_sd = ms([r.best for r in rs])
        avg, avg_sd = ms([r.mean for r in rs])
        out[meth] = {"acc_mean": acc, "acc_std": acc_sd, "best_mean": best, "best_std": best_sd,
                     "avg_mean": avg, "avg_std": avg_sd,
                     "floats_per_client": sum(r.floats_per_client for r in rs) / len(rs),
                     "client_s": sum(r.client_seconds for r in rs) / len(rs),
                     "server_s": sum(r.server_seconds for r in rs) / len(rs),
                     "per_seed": [r.accuracy for r in rs],
                     "history": [r.history for r in rs], "info": [r.info for r in rs]}
    return out


def run_setting(dataset="digits", data_dir=None, model="lenet5", clients=5, alpha=0.1, split_kind="balanced",
                protocol="one-shot", methods=None, seeds=(0,), cfg: M.TrainConfig | None = None, rounds=15,
                warmup=0, participation=1.0, progress=print, eval_every=1, dropout=0.0, transport=None,
                checkpoint=None, resume=False) -> dict:
    """One benchmark setting over ``seeds``: ``{"setting", "results" (mean ± std per method), "runs" (one
    :class:`fedsciml.runtime.results.Result` per method and seed, as dicts: ``solve``'s layout), "wall_s"}``.

    ``transport(seed, spec) -> Transport`` (optional; e.g. Flower's, :func:`fedsciml.engines.flower.images.run_setting`)
    carries the messages instead of the in-process clients; ``spec`` is the plain-value description of the
    split a remote node rebuilds its client from (:func:`fedsciml.images.methods.image_client`).
    ``checkpoint``/``resume``: multi-round protocols only (see :func:`fedsciml.images.methods.run_rounds`)."""
    cfg = cfg or M.TrainConfig()
    if protocol not in ("one-shot", "warmup-refine", "rounds"):
        raise ValueError(f"protocol must be one-shot, warmup-refine or rounds, got {protocol!r}")
    if protocol == "one-shot" and (checkpoint or resume):
        raise ValueError("--checkpoint/--resume apply to the multi-round protocols (rounds, warmup-refine); "
                         "a one-shot method has a single round")
    if methods is None:
        methods = M.default_methods(protocol)
    for m in methods:
        M.image_method(m, protocol)
    d = imdata.load(dataset, data_dir)
    per_seed, runs, t0 = [], [], time.perf_counter()
    warm = warmup if protocol == "warmup-refine" else 0
    setting = {"dataset": dataset, "model": model, "clients": clients, "alpha": alpha, "split": split_kind,
               "protocol": protocol, "rounds": rounds, "warmup": warm, "participation": participation,
               "dropout": dropout}
    for s in seeds:
        progress(f"seed {s}: {dataset}, {clients} clients, "
                 f"{'IID' if alpha is None else f'Dirichlet α={alpha} ({split_kind})'}, model {model}, {protocol}")
        fed = imdata.federate(d, clients, alpha, s, split_kind, device=cfg.device)
        tr = "local" if transport is None else transport(s, {
            "dataset": dataset, "data_dir": data_dir, "clients": clients, "alpha": alpha, "split": split_kind,
            "seed": s, "model": model, "device": cfg.device})
        if protocol == "one-shot":
            res = M.run_one_shot(fed, model, methods, s, cfg, progress, dropout=dropout, transport=tr)
        else:
            res = M.run_rounds(fed, model, methods, s, cfg, rounds, warm, participation, progress, eval_every,
                               dropout=dropout, transport=tr, checkpoint=checkpoint, resume=resume,
                               fingerprint={"dataset": dataset, "alpha": alpha, "split": split_kind})
        per_seed.append(res)
        runs += [to_result(r, setting, s, cfg).to_dict() for r in res.values()]
    summ = summarize(per_seed)
    return {"setting": {**{k: v for k, v in setting.items() if k != "warmup"}, "seeds": list(seeds), "warmup": warmup,
                        "config": {k: v for k, v in vars(cfg).items()},
                        # results are bit-reproducible per seed and thread count
                        "torch_threads": torch.get_num_threads()},
            "results": summ, "runs": runs, "wall_s": time.perf_counter() - t0}


def to_result(r: M.MethodResult, setting: dict, seed: int, cfg: M.TrainConfig) -> Result:
    """One method's run as a :class:`fedsciml.runtime.results.Result` (the layout of ``solve``): ``final`` holds the
    test accuracy (final, best and mean over the evaluated rounds) and the last training loss; ``history``
    the loop's rows per round (loss, accuracy, floats sent up/down, dropped and rejected clients, by count
    and by id); ``extra`` the floats per client, client/server seconds, rejections and the loop's report."""
    one_shot = setting["protocol"] == "one-shot"
    last = r.rows[-1] if r.rows else {}
    final = {"accuracy": r.accuracy, "loss": last.get("loss", float("nan"))}
    if not one_shot:
        final.update(best_accuracy=r.best, mean_accuracy=r.mean)
    extra = {"floats_per_client": r.floats_per_client, "client_s": r.client_seconds, "server_s": r.server_seconds,
             **{k: v for k, v in r.info.items() if k != "rounds"}, **{k: v for k, v in r.run.items()
                                                                       if k != "wall_time_s"},
             "torch_threads": torch.get_num_threads()}
    options = {**{k: v for k, v in setting.items() if k not in ("dataset", "clients")},
               "config": dataclasses.asdict(cfg)}
    return Result(problem=f"images-{setting['dataset']}", method=r.method, options=options, seed=seed,
                  device=cfg.device, dtype="float32", n_params=r.n_params, clients=setting["clients"],
                  wall_time_s=r.run.get("wall_time_s", 0.0), final=final, history=r.rows, extra=extra)


def table(res: dict) -> str:
    """The summary table, printed by the one table printer (:func:`fedsciml.runtime.results.format_table`)."""
    st, rs = res["setting"], res["results"]
    multi = st["protocol"] != "one-shot"
    head = (f"{st['dataset']} | {st['model']} | {st['clients']} clients | "
            f"{'IID' if st['alpha'] is None else 'alpha=' + str(st['alpha'])} | {st['protocol']} | "
            f"{len(st['seeds'])} seed(s)")

    def pm(m, s):
        return f"{100 * m:6.2f} ± {100 * s:5.2f}"
    rows = [{"method": m, "acc": pm(r["acc_mean"], r["acc_std"]), "best": pm(r["best_mean"], r["best_std"]),
             "avg": pm(r["avg_mean"], r["avg_std"]), "floats": r["floats_per_client"], "client_s": r["client_s"],
             "server_s": r["server_s"]} for m, r in rs.items()]
    if multi:
        cols = [("method", "method", "<18s"), ("final acc %", "acc", ">15s"), ("best acc %", "best", ">15s"),
                ("avg acc %", "avg", ">15s"), ("floats/client/rd", "floats", "17.0f"),
                ("client s/rd", "client_s", "11.2f"), ("server s/rd", "server_s", "11.3f")]
    else:
        cols = [("method", "method", "<18s"), ("test acc %", "acc", ">15s"), ("floats/client", "floats", "14.0f"),
                ("client s", "client_s", "9.2f"), ("server s", "server_s", "9.2f")]
    return head + "\n" + format_table(cols, rows)


def write_json(res, path):
    from fedsciml.runtime.results import write_json as write

    write(res, path)


def plot(res: dict, out_dir: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    st, rs = res["setting"], res["results"]
    fig, ax = plt.subplots(figsize=(7, 4))
    if st["protocol"] == "one-shot":
        names = list(rs)
        ax.bar(range(len(names)), [100 * rs[n]["acc_mean"] for n in names],
               yerr=[100 * rs[n]["acc_std"] for n in names], capsize=3)
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
        ax.set_ylabel("test accuracy (%)")
    else:
        for n, r in rs.items():
            h = r["history"][0]
            ax.plot([a for a, _ in h], [100 * b for _, b in h], label=n)
        ax.set_xlabel("round")
        ax.set_ylabel("test accuracy (%), seed " + str(st["seeds"][0]))
        ax.legend()
    alpha = "IID" if st["alpha"] is None else f"α={st['alpha']}"
    ax.set_title(f"{st['dataset']} {st['model']} {st['clients']} clients {alpha} {st['protocol']}")
    fig.tight_layout()
    path = os.path.join(out_dir, f"images_{st['dataset']}_{st['protocol']}_{alpha}.png".replace("α=", "alpha"))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
