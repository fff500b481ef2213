"""Reports: the only part that draws plots and writes them to files."""
