#!/usr/bin/env python3
"""exporting.tolerance on small hand-made models whose float32 error is known
(`python fuzz/models/test_exporting.py` with the pinned venv)."""

import unittest

import torch

import exporting


class Scaled(torch.nn.Module):
    """A fixed linear map times `k`, one tensor out (batch 3)."""

    def __init__(self, k):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.w = torch.nn.Parameter(torch.randn(16, 16, generator=g))
        self.k = k

    def forward(self, x):
        return (x @ self.w) * self.k


def tol(k, rows=3):
    model = Scaled(k).eval()
    g = torch.Generator().manual_seed(1)
    inputs = [(torch.randn(rows, 16, generator=g),) for _ in range(2)]
    with torch.no_grad():
        outs = [(model(*xs),) for xs in inputs]
    return exporting.tolerance(model, inputs, outs)[1], exporting.output_scale(outs)


class Tolerance(unittest.TestCase):
    def test_one_tensor_of_several_rows_is_one_output(self):
        # Paired row by row with the float64 copy, the rows of other
        # samples set it to the outputs' own size.
        atol, scale = tol(1.0)
        self.assertGreater(scale, 1.0)
        self.assertLessEqual(atol, 1e-3)

    def test_outputs_far_below_one_get_a_tolerance_below_them(self):
        atol, scale = tol(1e-8)
        self.assertLess(scale, 1e-6)
        self.assertLessEqual(atol, 1e-3 * scale)

    def test_large_outputs_keep_a_relative_tolerance(self):
        atol, scale = tol(1e9)
        self.assertGreater(scale, 1e9)
        self.assertGreater(atol, 0.0)
        self.assertLessEqual(atol, 1e-4 * scale)

    def test_output_scale_ignores_non_finite_and_integer_outputs(self):
        outs = [(torch.tensor([1.0, float("inf"), -3.0]), torch.tensor([100]))]
        self.assertEqual(exporting.output_scale(outs), 3.0)


if __name__ == "__main__":
    unittest.main()
