"""Small reference models and corpora that expkit uses as model-level correctness oracles."""
