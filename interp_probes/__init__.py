"""The probes. Each subpackage registers its config (torch-free) in its __init__; the method
lives in its `probe` module and is imported only when a run starts."""
