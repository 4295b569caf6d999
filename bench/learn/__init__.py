"""The simulated-user learning benchmark: does talking to learnproxy teach it a hidden preference?

`runner.main` drives a real `learnproxy serve --with-worker` subprocess over HTTP as simulated
users (`users`), checks every held-out reply with the users' ground-truth rules (`rules`) behind a
quality guard (`quality`), and `report.render` turns the results into tables and plots.
"""
