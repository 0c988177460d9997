"""Shared code for the GRPO course notebooks: data, rewards, profiles, training, plots, evaluation."""
