"""Rotated images: a covariate shift of growing size for classifiers trained on upright ones.

Rotated MNIST (the digits of the test set turned by 0..180 degrees) is the shift benchmark
of Ovadia et al., "Can You Trust Your Model's Uncertainty? Evaluating Predictive
Uncertainty Under Dataset Shift" (NeurIPS 2019, Section 4): a well-calibrated model's
error grows with the angle and so should its predictive uncertainty, keeping the
calibration error low. No torchvision needed.
"""

import math
import torch
import torch.nn.functional as F

__all__ = ["rotate_images", "ROTATION_ANGLES"]

#: Ovadia et al.'s angles (degrees), 0 to 180 in steps of 15
ROTATION_ANGLES = tuple(range(0, 181, 15))


def rotate_images(images: torch.Tensor, degrees: float) -> torch.Tensor:
    """``images`` of shape ``(..., H, W)`` turned counter-clockwise (as displayed: row 0 at
    the top) by ``degrees`` about the image centre, bilinearly interpolated; pixels that come
    from outside the image are 0 (the background of MNIST and Fashion-MNIST).

    Output pixel centre ``p`` takes the value at ``R(-degrees) (p - c) + c`` of the input
    (``c``: the centre, ``((W - 1)/2, (H - 1)/2)`` in pixel units), so turning by a multiple of
    90 degrees maps pixel centres onto pixel centres and only moves pixels: 0 degrees is the
    identity and 90 degrees is ``torch.rot90(images, 1, (-2, -1))``, the transpose flipped
    upside down (for square images; up to the rounding of the sampling grid, ~1e-6 in float32).

    :param images: a floating tensor ``(H, W)``, ``(C, H, W)`` or ``(N, C, H, W)`` (any number
        of leading dimensions).
    :param degrees: the angle, counter-clockwise.
    """
    if not torch.is_tensor(images) or images.dim() < 2:
        raise ValueError(f"rotate_images: expected images of shape (..., H, W), got {getattr(images, 'shape', type(images).__name__)}")
    if not images.is_floating_point():
        raise TypeError(f"rotate_images: images must be floating point (e.g. pixels in [0, 1]), got {images.dtype}; convert with images.float() / 255")
    if not math.isfinite(float(degrees)):
        raise ValueError(f"rotate_images: the angle must be finite, got {degrees!r}")
    lead, (H, W) = images.shape[:-2], images.shape[-2:]
    flat = images.reshape(-1, 1, H, W)
    theta = math.radians(float(degrees))
    cos, sin = math.cos(theta), math.sin(theta)
    # grid_sample's coordinates: x to the right, y downwards, both in [-1, 1] across the
    # image (align_corners=False: the outer pixel edges), so a pixel's normalised position is
    # (2 * column + 1) / W - 1. A counter-clockwise turn on screen (y down) maps the output
    # position (u, v) to the input position (cos u - sin v, sin u + cos v) in pixel units;
    # in normalised units the off-diagonal terms carry the aspect ratio H / W.
    matrix = torch.tensor([[cos, -sin * H / W, 0.0], [sin * W / H, cos, 0.0]], dtype=flat.dtype, device=flat.device)
    grid = F.affine_grid(matrix.expand(flat.shape[0], 2, 3), list(flat.shape), align_corners=False)
    rotated = F.grid_sample(flat, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    return rotated.reshape(*lead, H, W)

