"""Issue 31: FusionServer names the client at fault, before pooling (an out-of-scale message) or when the solve
fails (a ``G`` that is no Gram matrix), instead of blaming the pooled Gram."""
import pytest
import torch

from fedsciml.core import linalg
from fedsciml.core.schema import MessageRejected, max_magnitude
from fedsciml.core.stats import FusionServer, SingularGram, client_message, fuse

D64 = torch.float64


def _clients(k=3, d=5, n=20):
    gen = torch.Generator().manual_seed(0)
    return {c: client_message(torch.randn(n, d, generator=gen, dtype=D64), torch.randn(n, generator=gen, dtype=D64))
            for c in range(k)}


def _all(msg, value):
    return {k: (torch.full_like(v, value) if k != "n" else v) for k, v in msg.items()}


def test_a_client_sending_1e300_everywhere_is_rejected_by_name_and_the_others_fuse():
    msgs = _clients()
    msgs[1] = _all(msgs[1], 1e300)
    server = FusionServer(5)
    ok, bad = server.receive_all(msgs)
    assert ok == [0, 2] and list(bad) == [1]
    assert bad[1].startswith("field 'G' has a diagonal entry of magnitude 1e+300 > 1.34e+154")
    ref = FusionServer(5)
    ref.receive_all({c: msgs[c] for c in (0, 2)})
    # bitwise: the same two messages summed in the same order, the same Cholesky
    assert torch.equal(server.solve(1e-3), ref.solve(1e-3))
    with pytest.raises(MessageRejected, match=r"client 1 rejected: field 'G' has a diagonal entry of magnitude 1e\+300"):
        fuse(msgs, 1e-3)  # fuse refuses the run when any client is rejected


@pytest.mark.parametrize("form,field", [("gram", "h"), ("sqrt", "R"), ("sqrt", "z")])
def test_each_field_out_of_scale_is_named(form, field):
    gen = torch.Generator().manual_seed(1)
    msg = client_message(torch.randn(3, 5, generator=gen, dtype=D64), torch.randn(3, generator=gen, dtype=D64),
                         form=form)
    msg[field] = msg[field].flatten().index_fill(0, torch.tensor([0]), 1e200).reshape(msg[field].shape)
    with pytest.raises(MessageRejected, match=rf"field '{field}' has an entry of magnitude 1e\+200"):
        FusionServer(5).receive(0, msg)


def test_the_bound_is_sqrt_max_of_the_servers_dtype_and_gn_field_names_are_kept():
    msg = {"H": linalg.pack_upper(torch.eye(4, dtype=D64)), "g": torch.zeros(4, dtype=D64),
           "n": torch.tensor([4.0], dtype=D64)}
    at = max_magnitude(D64)
    FusionServer(4).receive(0, {**msg, "g": torch.tensor([at, 0, 0, 0], dtype=D64)})  # at the bound: accepted
    with pytest.raises(MessageRejected, match="field 'g' has an entry"):
        FusionServer(4).receive(0, {**msg, "g": torch.tensor([2 * at, 0, 0, 0], dtype=D64)})
    # a float32 server: its own bound (1.8e19), not float64's
    with pytest.raises(MessageRejected, match=r"field 'H' has a diagonal entry of magnitude 1e\+30 > 1.84e\+19"):
        FusionServer(4, dtype=torch.float32).receive(0, {**msg, "H": msg["H"] * 1e30})


def test_non_finite_statistics_keep_their_own_reason():
    msgs = _clients()
    msgs[1] = _all(msgs[1], float("inf"))
    _, bad = FusionServer(5).receive_all(msgs)
    assert bad == {1: "field 'G' contains non-finite values"}


def test_a_G_that_is_no_gram_matrix_is_named_when_the_solve_fails():
    msgs = _clients()
    G = linalg.unpack_upper(msgs[2]["G"], 5).clone()
    G[0, 1] = G[1, 0] = 1e3  # |G_01| > √(G_00 G_11): indefinite, the pooled Gram too
    msgs[2] = {**msgs[2], "G": linalg.pack_upper(G)}
    server = FusionServer(5)
    assert server.receive_all(msgs)[0] == [0, 1, 2]  # its diagonal is in scale: only the solve shows it
    with pytest.raises(SingularGram, match=r"^client 2: field 'G' has an off-diagonal entry .* FusionServer.drop\(2\)"):
        server.solve(1e-3)
    server.drop(2)
    assert torch.isfinite(server.solve(1e-3)).all()


def test_an_honest_rank_deficient_pool_still_blames_the_pooled_gram():
    gen = torch.Generator().manual_seed(2)
    msgs = {c: client_message(torch.randn(1, 5, generator=gen, dtype=D64), torch.randn(1, generator=gen, dtype=D64))
            for c in range(2)}  # 2 rows for 5 features
    server = FusionServer(5)
    server.receive_all(msgs)
    with pytest.raises(SingularGram, match="the pooled Gram matrix is singular"):
        server.solve(0.0)
