"""Every module path of the course's needle imports, with the names the course's modules define."""
import importlib

import pytest

COURSE_MODULES = {
    "needle": [
        "Tensor", "TensorOp", "cpu", "cuda", "all_devices", "ops", "init", "nn", "optim", "data",
        "add", "matmul", "summation", "logsumexp", "ones", "zeros", "ones_like", "zeros_like",
        "BACKEND", "array_api", "NDArray", "Device", "default_device", "cpu_numpy",
    ],
    "needle.autograd": [
        "Value", "Op", "TensorOp", "TensorTupleOp", "Tensor", "TensorTuple", "NDArray", "LAZY_MODE",
        "TENSOR_COUNTER", "find_topo_sort", "topo_sort_dfs", "compute_gradient_of_variables",
        "array_api", "Device", "default_device", "cpu", "all_devices",
    ],
    "needle.backend_selection": [
        "BACKEND", "array_api", "NDArray", "Device", "cpu", "cuda", "cpu_numpy", "default_device", "all_devices",
    ],
    "needle.backend_numpy": ["Device", "CPUDevice", "cpu", "default_device", "all_devices"],
    "needle.backend_ndarray": [
        "NDArray", "BackendDevice", "array", "empty", "full", "broadcast_to", "reshape", "maximum",
        "log", "exp", "tanh", "sum", "max", "flip", "stack", "split", "transpose",
        "cpu", "cpu_numpy", "cuda", "default_device", "all_devices",
    ],
    "needle.backend_ndarray.ndarray": ["NDArray"],
    "needle.backend_ndarray.ndarray_backend_numpy": [
        "Array", "to_numpy", "from_numpy", "fill", "compact", "ewise_setitem", "scalar_setitem",
        "ewise_add", "scalar_add", "ewise_mul", "scalar_mul", "ewise_div", "scalar_div", "scalar_power",
        "ewise_maximum", "scalar_maximum", "ewise_eq", "scalar_eq", "ewise_ge", "scalar_ge",
        "ewise_log", "ewise_exp", "ewise_tanh", "matmul", "matmul_tiled", "reduce_max", "reduce_sum",
        "__device_name__", "__tile_size__", "_datatype", "_datatype_size",
    ],
    "needle.ops": ["EWiseAdd", "add", "Summation", "summation", "LogSumExp", "logsumexp", "make_tuple", "tuple_get_item"],
    "needle.ops.ops_mathematic": [
        "EWiseAdd", "add", "AddScalar", "add_scalar", "EWiseMul", "multiply", "MulScalar", "mul_scalar",
        "EWisePow", "power", "PowerScalar", "power_scalar", "EWiseDiv", "divide", "DivScalar", "divide_scalar",
        "Transpose", "transpose", "Reshape", "reshape", "BroadcastTo", "broadcast_to", "Summation", "summation",
        "MatMul", "matmul", "Negate", "negate", "Log", "log", "Exp", "exp", "ReLU", "relu", "Tanh", "tanh",
        "Stack", "stack", "Split", "split", "Flip", "flip", "Dilate", "dilate", "UnDilate", "undilate",
    ],
    "needle.ops.ops_logarithmic": ["LogSoftmax", "logsoftmax", "LogSumExp", "logsumexp"],
    "needle.ops.ops_tuple": ["MakeTensorTuple", "TupleGetItem", "tuple_get_item", "make_tuple", "FusedAddScalars", "fused_add_scalars"],
    "needle.init": ["rand", "randn", "constant", "ones", "zeros", "randb", "one_hot", "zeros_like", "ones_like",
                    "xavier_uniform", "xavier_normal", "kaiming_uniform", "kaiming_normal"],
    "needle.init.init_basic": ["rand", "randn", "constant", "ones", "zeros", "randb", "one_hot", "zeros_like", "ones_like"],
    "needle.init.init_initializers": ["xavier_uniform", "xavier_normal", "kaiming_uniform", "kaiming_normal"],
    "needle.nn": ["Module", "Parameter", "Linear", "Sequential", "SoftmaxLoss", "BatchNorm1d", "LayerNorm1d"],
    "needle.nn.nn_basic": [
        "Module", "Parameter", "Identity", "Linear", "Flatten", "ReLU", "Sequential", "SoftmaxLoss",
        "BatchNorm1d", "LayerNorm1d", "Dropout", "Residual",
    ],
    "needle.optim": ["Optimizer", "SGD", "Adam"],
    "needle.data": ["Dataset", "DataLoader", "MNISTDataset", "NDArrayDataset", "Transform", "RandomFlipHorizontal", "RandomCrop"],
    "needle.data.data_basic": ["Dataset", "DataLoader"],
    "needle.data.data_transforms": ["Transform", "RandomFlipHorizontal", "RandomCrop"],
    "needle.data.datasets": ["MNISTDataset", "NDArrayDataset"],
    "needle.data.datasets.mnist_dataset": ["MNISTDataset"],
    "needle.data.datasets.ndarray_dataset": ["NDArrayDataset"],
}


@pytest.mark.parametrize("path, names", COURSE_MODULES.items(), ids=list(COURSE_MODULES))
def test_course_module_path_imports_with_its_names(path, names):
    module = importlib.import_module(path)
    missing = [name for name in names if not hasattr(module, name)]
    assert not missing, f"{path} lacks {missing}"


def test_course_import_forms():
    import needle
    import needle.optim
    from needle.optim import Adam, SGD
    from needle.data.datasets import MNISTDataset, NDArrayDataset
    from needle.data import data_basic, data_transforms, datasets

    assert needle.optim.SGD is SGD and needle.optim.Adam is Adam
    assert datasets.MNISTDataset is MNISTDataset is needle.data.MNISTDataset
    assert datasets.ndarray_dataset.NDArrayDataset is NDArrayDataset
    assert data_basic.DataLoader is needle.data.DataLoader and data_transforms.RandomCrop is needle.data.RandomCrop
    assert needle.backend_numpy.cpu() is needle.cpu()
    assert isinstance(needle.cpu(), needle.backend_numpy.CPUDevice)
    assert not isinstance(needle.cuda(), needle.backend_numpy.CPUDevice)

