"""The job store: models, migrations, data functions, API tokens and the store lock."""
