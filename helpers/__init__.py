"""Shared code for the course notebooks: data, rewards, profiles, training, plots, evaluation."""
