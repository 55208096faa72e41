"""Benchmark driver shared by ``python -m fedsciml bench images`` and ``scripts/bench_images*.py``:
runs a protocol over seeds, aggregates mean ± std, prints a table, writes JSON and a PNG."""
from __future__ import annotations

import math
import os
import time

import torch

from fedsciml.images import data as imdata
from fedsciml.images import methods as M


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
                warmup=0, participation=1.0, progress=print, eval_every=1, dropout=0.0, transport=None) -> dict:
    """One benchmark setting over ``seeds``.  ``transport(seed, spec) -> Transport`` (optional; e.g. Flower's,
    :func:`fedsciml.flower.images.run_setting`) carries the messages instead of the in-process clients; ``spec``
    is the plain-value description of the split a remote node rebuilds its client from
    (:func:`fedsciml.images.methods.image_client`)."""
    cfg = cfg or M.TrainConfig()
    if protocol not in ("one-shot", "warmup-refine", "rounds"):
        raise ValueError(f"protocol must be one-shot, warmup-refine or rounds, got {protocol!r}")
    if methods is None:
        methods = list(M.ONE_SHOT[:6]) if protocol == "one-shot" else ["fedavg", "fedprox", "fipa", "fipa-fc",
                                                                         "fedfish"]
    d = imdata.load(dataset, data_dir)
    per_seed, t0 = [], time.perf_counter()
    for s in seeds:
        progress(f"seed {s}: {dataset}, {clients} clients, "
                 f"{'IID' if alpha is None else f'Dirichlet α={alpha} ({split_kind})'}, model {model}, {protocol}")
        fed = imdata.federate(d, clients, alpha, s, split_kind, device=cfg.device)
        tr = "local" if transport is None else transport(s, {
            "dataset": dataset, "data_dir": data_dir, "clients": clients, "alpha": alpha, "split": split_kind,
            "seed": s, "model": model, "device": cfg.device})
        if protocol == "one-shot":
            per_seed.append(M.run_one_shot(fed, model, methods, s, cfg, progress, dropout=dropout, transport=tr))
        else:
            per_seed.append(M.run_rounds(fed, model, methods, s, cfg, rounds,
                                         warmup if protocol == "warmup-refine" else 0, participation, progress,
                                         eval_every, dropout=dropout, transport=tr))
    summ = summarize(per_seed)
    return {"setting": {"dataset": dataset, "model": model, "clients": clients, "alpha": alpha, "split": split_kind,
                        "protocol": protocol, "seeds": list(seeds), "rounds": rounds, "warmup": warmup,
                        "participation": participation, "dropout": dropout, "config": {k: v for k, v in vars(cfg).items()},
                        "torch_threads": torch.get_num_threads()},  # results are bit-reproducible per seed and thread count
            "results": summ, "wall_s": time.perf_counter() - t0}


def table(res: dict) -> str:
    st, rs = res["setting"], res["results"]
    multi = st["protocol"] != "one-shot"
    head = (f"{st['dataset']} | {st['model']} | {st['clients']} clients | "
            f"{'IID' if st['alpha'] is None else 'alpha=' + str(st['alpha'])} | {st['protocol']} | "
            f"{len(st['seeds'])} seed(s)")
    lines = [head]
    if multi:
        lines.append(f"{'method':18s} {'final acc %':>15s} {'best acc %':>15s} {'avg acc %':>15s} "
                     f"{'floats/client/rd':>17s} {'client s/rd':>11s} {'server s/rd':>11s}")
    else:
        lines.append(f"{'method':18s} {'test acc %':>15s} {'floats/client':>14s} {'client s':>9s} {'server s':>9s}")
    for m, r in rs.items():
        acc = f"{100 * r['acc_mean']:6.2f} ± {100 * r['acc_std']:5.2f}"
        if multi:
            lines.append(f"{m:18s} {acc:>15s} {100 * r['best_mean']:6.2f} ± {100 * r['best_std']:5.2f} "
                         f"{100 * r['avg_mean']:6.2f} ± {100 * r['avg_std']:5.2f} {r['floats_per_client']:17.0f} "
                         f"{r['client_s']:11.2f} {r['server_s']:11.3f}")
        else:
            lines.append(f"{m:18s} {acc:>15s} {r['floats_per_client']:14.0f} {r['client_s']:9.2f} "
                         f"{r['server_s']:9.2f}")
    return "\n".join(lines)


def write_json(res, path):
    from fedsciml.results import write_json as write

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
