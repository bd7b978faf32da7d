import numpy as np

from fxdeploy.lowering.ncnn_checks import _max_error


def test_equal_infinities_count_as_equal_without_numpy_warnings(recwarn):
    want = np.array([-np.inf, 1.0, np.inf], dtype=np.float32)
    assert _max_error(want.copy(), want) == 0.0
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


def test_unequal_infinities_are_a_mismatch():
    want = np.array([-np.inf, 1.0], dtype=np.float32)
    assert _max_error(np.array([np.inf, 1.0], dtype=np.float32), want) == np.inf
    assert _max_error(np.array([0.0, 1.0], dtype=np.float32), want) == np.inf
