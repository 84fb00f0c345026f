"""Rotated images (the rotated-MNIST shift of Ovadia et al. 2019)."""

import pytest
import torch

from pyrozoo.data import ROTATION_ANGLES, rotate_images

#: float32 rounding of the sampling grid
ATOL = 1e-5

SHAPES = [pytest.param((28, 28), id="HxW"), pytest.param((3, 1, 28, 28), id="NxCxHxW"), pytest.param((2, 9, 9), id="odd")]


@pytest.mark.parametrize("shape", SHAPES)
def test_rotation_by_zero_is_the_identity(shape):
    images = torch.rand(shape, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(rotate_images(images, 0.0), images, atol=ATOL, rtol=0)
    torch.testing.assert_close(rotate_images(images, 360.0), images, atol=ATOL, rtol=0)


@pytest.mark.parametrize("shape", SHAPES)
def test_quarter_turns_only_move_pixels(shape):
    """90 degrees counter-clockwise is the transpose flipped upside down (row 0 at the top)."""
    images = torch.rand(shape, generator=torch.Generator().manual_seed(1))
    expected = images.transpose(-2, -1).flip(-2)
    torch.testing.assert_close(rotate_images(images, 90.0), expected, atol=ATOL, rtol=0)
    torch.testing.assert_close(rotate_images(images, -90.0), images.transpose(-2, -1).flip(-1), atol=ATOL, rtol=0)
    torch.testing.assert_close(rotate_images(images, 180.0), images.flip(-2, -1), atol=ATOL, rtol=0)


def test_a_pixel_turns_counter_clockwise_about_the_centre():
    image = torch.zeros(5, 5)
    image[0, 4] = 1.0  # top right
    assert rotate_images(image, 90.0)[0, 0] == pytest.approx(1.0, abs=ATOL)  # to the top left
    # at 45 degrees a pixel 2 right of the centre moves to 2 (cos 45, sin 45) right and up of it:
    # the brightest output pixel is the one nearest there, column 4 + 1.41 -> 5, row 4 - 1.41 -> 3
    image = torch.zeros(9, 9)
    image[4, 6] = 1.0
    turned = rotate_images(image, 45.0)
    assert divmod(int(turned.argmax()), 9) == (3, 5)


def test_the_angles_and_bad_input():
    assert ROTATION_ANGLES[0] == 0 and ROTATION_ANGLES[-1] == 180 and len(ROTATION_ANGLES) == 13
    with pytest.raises(TypeError, match="floating"):
        rotate_images(torch.zeros(4, 4, dtype=torch.uint8), 10.0)
    with pytest.raises(ValueError, match="finite"):
        rotate_images(torch.zeros(4, 4), float("nan"))
    with pytest.raises(ValueError, match="H, W"):
        rotate_images(torch.zeros(4), 10.0)
