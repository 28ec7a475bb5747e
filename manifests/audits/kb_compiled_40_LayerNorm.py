"""KernelBench level1/40_LayerNorm.py under torch.compile (inductor, default mode): see kb_compile.py."""
from kb_compile import compiled_model_new

ModelNew = compiled_model_new("../../.kernelbench/KernelBench/level1/40_LayerNorm.py", __file__)
