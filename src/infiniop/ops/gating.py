"""fused_gated_delta_net_gating: the gates of a gated delta net, two float32 outputs in one
pass: g = -exp(A_log) * softplus(a + dt_bias, beta, threshold), beta_output = sigmoid(b).
A_log and dt_bias have one value per head (the last dim) and broadcast."""

from ..elementwise.operator import elementwise
from ..elementwise.spec import HALF_AND_SINGLE
from .activation import SOFTPLUS


def _gating(m, A_log, a, b, dt_bias, beta, threshold):
    g = -m.exp(A_log) * m.softplus(a + dt_bias, beta, threshold)
    return g, m.sigmoid(b)


FUSED_GATED_DELTA_NET_GATING = elementwise(
    "fused_gated_delta_net_gating", ("A_log", "a", "b", "dt_bias"), HALF_AND_SINGLE, _gating,
    outputs=("g", "beta_output"), signatures="T, T, T, T -> f32, f32",
    params=SOFTPLUS.params,  # softplus's beta and threshold, validated the same way
    doc="g = -exp(A_log) * softplus(a + dt_bias), beta_output = sigmoid(b)")
