"""Tables and plots built from the runs' metrics files."""
