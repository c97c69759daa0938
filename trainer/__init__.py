"""The PyTorch trainer: model, data, checkpoints, guard, live control, telemetry."""
