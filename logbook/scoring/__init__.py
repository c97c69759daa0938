"""A run's outcome against its preregistration: predictions measured and judged, forecasts scored, calibration."""
