"""The build stage: `faforge build`, each family's batches through rattler-build, and the pip cells' wheels."""
