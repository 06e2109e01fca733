"""Layer stacks of the model families bcgprof profiles, built from a Hugging Face config.json."""
