"""The small shared package: settings, DB models, the Celery app and model loading.

`proxy`, `judges` and `learner` never import each other; they meet here and in the DB.
"""
