"""What the Spark estimators share: stores, params, materialisation, reading, persistence."""
