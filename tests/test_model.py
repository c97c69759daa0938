"""The GPT, its parameter groups, QK-clip and the learning-rate schedules."""

from __future__ import annotations

import pytest
import torch

from trainer.config import ModelConfig, OptimConfig, ScheduleConfig
from trainer.nn.model import GPT, flops_per_token
from trainer.nn.optim import CombinedOptimizer, apply_hyperparams, build_optimizer, learning_rate, lr_factor, qk_clip

@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: a second thread on a busy machine only waits
    yield
    torch.set_num_threads(before)


SMALL = ModelConfig(n_layer=2, n_head=2, n_embd=16, block_size=8, vocab_size=256)


def _model(**kw) -> GPT:
    torch.manual_seed(0)
    return GPT(ModelConfig(**{**SMALL.__dict__, **kw}))


def _batch(n: int = 3, T: int = 8):
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 256, (n, T + 1), generator=g)
    return x[:, :-1], x[:, 1:]


def test_forward_reports_cross_entropy_and_z_loss_apart():
    out = _model(z_loss=1e-2)(*_batch())
    assert out.logits.shape == (3, 8, 256)
    assert out.z_loss > 0
    assert torch.allclose(out.loss, out.ce_loss + out.z_loss)
    assert _model(z_loss=0.0)(*_batch()).z_loss == 0


def test_z_loss_coefficient_scales_the_term():
    a, b = _model(z_loss=1e-3)(*_batch()), _model(z_loss=2e-3)(*_batch())
    assert torch.allclose(b.z_loss, 2 * a.z_loss) and torch.equal(a.ce_loss, b.ce_loss)


def test_embeddings_and_norms_get_no_weight_decay():
    m = _model()
    opt = build_optimizer(m, OptimConfig(weight_decay=0.1), "cpu")
    names = {id(p): n for n, p in m.named_parameters()}
    groups = {g["name"]: g for g in opt.param_groups}
    no_decay = {names[id(p)] for p in groups["no_decay"]["params"]}
    decay = {names[id(p)] for p in groups["decay"]["params"]}
    assert groups["no_decay"]["weight_decay"] == 0.0 and groups["decay"]["weight_decay"] == 0.1
    assert {"wte.weight", "wpe.weight", "norm_f.weight", "blocks.0.attn.q_gain"} <= no_decay
    assert "blocks.0.attn.qkv.weight" in decay and "blocks.1.mlp.fc.weight" in decay
    assert not decay & no_decay and len(decay | no_decay) == len(list(m.parameters()))


def test_muon_takes_only_hidden_matrices_and_saves_as_one_state_dict():
    m = _model(tie_embeddings=False)
    opt = build_optimizer(m, OptimConfig(name="muon"), "cpu")
    assert isinstance(opt, CombinedOptimizer) and set(opt.optimizers) == {"muon", "adamw"}
    names = {id(p): n for n, p in m.named_parameters()}
    muon = {names[id(p)] for g in opt.optimizers["muon"].param_groups for p in g["params"]}
    assert muon and all(n.startswith("blocks.") and n.endswith(".weight") and "norm" not in n for n in muon)
    assert "lm_head.weight" not in muon and "wte.weight" not in muon
    m(*_batch()).loss.backward()
    opt.step()
    state = opt.state_dict()
    fresh = build_optimizer(m, OptimConfig(name="muon"), "cpu")
    fresh.load_state_dict(state)
    bufs = [s["momentum_buffer"] for s in fresh.optimizers["muon"].state.values()]
    assert bufs and all(b.abs().sum() > 0 for b in bufs)


def test_a_changed_config_wins_over_the_hyperparameters_saved_in_the_optimizer():
    m = _model()
    opt = build_optimizer(m, OptimConfig(lr=1e-3, weight_decay=0.1), "cpu")
    fresh = build_optimizer(m, OptimConfig(lr=1e-3, weight_decay=0.1), "cpu")
    fresh.load_state_dict(opt.state_dict())
    apply_hyperparams(fresh, OptimConfig(lr=5e-4, weight_decay=0.01))
    groups = {g["name"]: g for g in fresh.param_groups}
    assert groups["decay"]["base_lr"] == 5e-4 and groups["decay"]["weight_decay"] == 0.01


@pytest.mark.parametrize("qk_norm", [True, False])
def test_qk_clip_brings_the_max_attention_logit_down_to_tau(qk_norm):
    m = _model(qk_norm=qk_norm)
    with torch.no_grad():  # blow up the query/key scale so logits run away
        for b in m.blocks:
            if qk_norm:
                b.attn.q_gain.mul_(20.0)
                b.attn.k_gain.mul_(20.0)
            else:
                b.attn.qkv.weight[: 2 * 16].mul_(60.0)
    x, _ = _batch()
    m.set_max_logit_tracking(True)
    m(x)
    before = max(float(t.max()) for t in m.max_logits())
    tau = before / 4
    assert qk_clip(m, tau) > 0
    m(x)
    after = max(float(t.max()) for t in m.max_logits())
    assert after <= tau * 1.01 and after < before


def test_max_logit_probe_matches_the_explicit_attention_logits():
    m = _model()
    x, _ = _batch()
    m.set_max_logit_tracking(True)
    m(x)
    attn = m.blocks[0].attn
    h = m.wte(x) + m.wpe(torch.arange(8))
    q, k, _ = attn.qkv(m.blocks[0].norm1(h)).split(16, dim=2)
    q, k = (t.view(3, 8, 2, 8).transpose(1, 2) for t in (q, k))
    q = torch.nn.functional.rms_norm(q, (8,)) * attn.q_gain[None, :, None, :]
    k = torch.nn.functional.rms_norm(k, (8,)) * attn.k_gain[None, :, None, :]
    logits = (q @ k.transpose(-1, -2)) / 8 ** 0.5
    logits = logits.masked_fill(torch.ones(8, 8, dtype=torch.bool).triu(1), float("-inf"))
    assert torch.allclose(m.max_logits()[0], logits.amax(dim=(0, 2, 3)), atol=1e-5)


def test_tied_embeddings_share_one_tensor_and_untied_do_not():
    tied, untied = _model(tie_embeddings=True), _model(tie_embeddings=False)
    assert tied.lm_head.weight.data_ptr() == tied.wte.weight.data_ptr()
    assert untied.lm_head.weight.data_ptr() != untied.wte.weight.data_ptr()
    assert untied.num_params() == tied.num_params() + 256 * 16


def test_flops_per_token_is_six_n_plus_attention():
    m = _model()
    n = m.num_params()
    assert n == sum(p.numel() for p in m.parameters()) - 8 * 16  # position embedding left out
    assert m.flops_per_token() == 6 * n + 12 * 2 * 8 * 16 == flops_per_token(m.cfg, n)


def test_sequences_longer_than_the_context_are_refused():
    with pytest.raises(ValueError, match="block_size"):
        _model()(torch.zeros(1, 9, dtype=torch.long))


def test_cosine_schedule_warms_up_then_decays_to_the_floor():
    s = ScheduleConfig(kind="cosine", warmup_steps=10, min_lr_ratio=0.1)
    assert lr_factor(1, s, 100) == pytest.approx(0.1)
    assert lr_factor(10, s, 100) == pytest.approx(1.0)
    assert lr_factor(55, s, 100) == pytest.approx(0.55)
    assert lr_factor(100, s, 100) == pytest.approx(0.1)
    values = [lr_factor(i, s, 100) for i in range(10, 101)]
    assert values == sorted(values, reverse=True)


@pytest.mark.parametrize("shape, mid", [("linear", 0.5), ("cosine", 0.5), ("sqrt", 1 - 0.5 ** 0.5)])
def test_wsd_schedule_is_flat_then_decays_over_the_last_fraction(shape, mid):
    s = ScheduleConfig(kind="wsd", warmup_steps=5, decay_fraction=0.2, decay_shape=shape, min_lr_ratio=0.0)
    assert lr_factor(5, s, 100) == 1.0 and lr_factor(80, s, 100) == 1.0
    assert lr_factor(90, s, 100) == pytest.approx(mid)
    assert lr_factor(100, s, 100) == pytest.approx(0.0)


def test_lr_scale_multiplies_the_schedule():
    s = ScheduleConfig(kind="constant", warmup_steps=0)
    assert learning_rate(7, 1e-3, s, 100) == pytest.approx(1e-3)
    assert learning_rate(7, 1e-3, s, 100, lr_scale=0.9) == pytest.approx(9e-4)
