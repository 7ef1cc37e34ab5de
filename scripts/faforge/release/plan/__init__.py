"""The plan stage: which packages a channel and a wheel index lack, as CI jobs, asked of each family."""
