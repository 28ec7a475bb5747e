"""KernelBench level1/88_MinGPTNewGelu.py under torch.compile (inductor, default mode): see kb_compile.py."""
from kb_compile import compiled_model_new

ModelNew = compiled_model_new("../../.kernelbench/KernelBench/level1/88_MinGPTNewGelu.py", __file__)
