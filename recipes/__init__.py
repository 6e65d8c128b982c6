"""Training recipes: target features for drafter training, and the drafter itself."""
