"""The release pipeline: plan -> build -> verify -> publish, plus the torch-release bump and the channel page."""
