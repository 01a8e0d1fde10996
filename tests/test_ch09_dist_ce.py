"""Chapter 9: Colossal-AI's vocabulary-parallel cross-entropy in bf16 loses the target's
gradient near zero loss."""

from __future__ import annotations

from helpers.run.launch import launch


def test_dist_cross_entropy_bf16_near_zero_loss():
    rows = launch("ch09_dist_ce", 2, [], show="none", timeout_s=180).results
    by_margin = {r["margin"]: r for r in rows}
    far = by_margin[
        2.0
    ]  # a confident-enough model: Colossal-AI matches the exact loss and gradient
    assert abs(far["loss_colossal"] - far["loss_exact"]) < 0.01 * far["loss_exact"]
    assert all(
        abs(c - e) < 0.01 for c, e in zip(far["target_grad_colossal"], far["target_grad_exact"])
    )
    near = by_margin[10.0]  # p_target rounds to 1 in bf16
    assert all(g == 0.0 for g in near["target_grad_colossal"])  # the target is no longer pulled up
    assert all(g < -1e-4 for g in near["target_grad_exact"])  # although it should be
    assert all(
        s > 1e-4 for s in near["other_grad_sum_colossal"]
    )  # the rest still pushed down: Σ grad ≠ 0
    assert (
        abs(near["loss_colossal"] - near["loss_exact"]) < 0.05 * near["loss_exact"]
    )  # the loss itself is fine
