"""bench/cpu_kernels.py: every weight format computes the same linear (errors of its rounding, not of a wrong
kernel), the int8 weights are per-channel symmetric, and the JSON holds both parts."""
from __future__ import annotations

import json

import torch
import torch.nn.functional as F

from bench.cpu_kernels import SHAPES, _formats, _int8, main


def test_each_weight_format_is_the_fp32_linear_within_its_rounding():
    torch.manual_seed(0)
    weight, x = torch.randn(48, 32) / 32 ** 0.5, torch.randn(4, 32)
    want = F.linear(x, weight)
    bounds = {"fp32": 0.0, "fp16": 2e-3, "bf16": 2e-2, "int8_weight_only": 4e-2}
    formats = _formats(weight)
    with torch.inference_mode():
        for name, fn in formats.items():
            error = float((fn(x) - want).abs().max() / want.abs().max())
            assert error <= bounds[name], (name, error)
        assert not torch.equal(formats["int8_weight_only"](x), want)  # int8 does round


def test_int8_weights_are_symmetric_per_output_channel():
    weight = torch.tensor([[1.0, -0.5, 0.25], [0.0, 2.0, -4.0]])
    w8, scale = _int8(weight)
    assert w8.dtype == torch.int8 and w8.abs().amax(dim=1).tolist() == [127, 127]
    torch.testing.assert_close(w8.float() * scale.float()[:, None], weight, atol=0.02, rtol=0.01)


def test_the_json_has_both_parts(tmp_path):
    out = tmp_path / "k.json"
    main(["--runs", "1", "--out", str(out)])
    got = json.loads(out.read_text())
    assert len(SHAPES) == 210
    assert set(got["decode_linears"]["1_rows_ms"]) == {"fp32", "fp16", "bf16", "int8_weight_only"}
    assert got["decode_linears"]["gate_relative_error"]["fp32"] == 0.0
    attention = got["prompt_attention"]
    assert attention["float32"]["max_abs_diff"] == 0.0 and 0 < attention["bfloat16"]["max_abs_diff"] < 0.5
