"""RSS after each product of LM's blocked matrix-free operator on a PINNacle case with the 5 × 100 network: a
graph kept past its product shows as RSS growing product by product (``reproductions/pinnacle.md``, helper pin-mem).

    OMP_NUM_THREADS=1 nice python scripts/bench/block_operator_rss.py CASE N_INTERIOR N_BOUNDARY BLOCK_ROWS PRODUCTS
"""
import gc
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import torch  # noqa: E402

import fedsciml.engines  # noqa: E402,F401
from fedsciml.core.matfree import BlockGNOperator  # noqa: E402
from fedsciml.core.stats import row_blocks  # noqa: E402
from fedsciml.problems import get_problem  # noqa: E402

torch.set_num_threads(1)



def rss():
    with open('/proc/self/status') as f:
        for ln in f:
            if ln.startswith('VmRSS:'):
                return int(ln.split()[1]) * 1024
    return 0


case, ni, nb, blk, k = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
pb = get_problem("pinnacle", case=case, pinnacle_dir="/work/pinnacle", n_interior=ni, n_boundary=nb, hidden=[100]*5)
obj = pb.client_objectives(1, seed=0)[0]
theta = pb.init_params(0)
blocks = [b.residual for b in row_blocks(obj, theta, blk)]
print(case, 'rows', obj.n_residuals, 'blocks', len(blocks))
gc.collect()
r0 = rss()
t0 = time.process_time()
op = BlockGNOperator(blocks, theta)
print(f"built: {(rss()-r0)/1e9:.3f} GB over start {r0/1e9:.2f}", flush=True)
v = torch.randn_like(theta)
for i in range(k):
    op.matvec(v)
    print(f"product {i}: {(rss()-r0)/1e9:.3f} GB peak {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss*1024/1e9:.2f}", flush=True)
print('cpu', time.process_time() - t0)
