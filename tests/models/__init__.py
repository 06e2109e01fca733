"""The model families and kernels on the CPU: transformers reference models, Triton's interpreter
and gloo process groups (tensor parallelism)."""
