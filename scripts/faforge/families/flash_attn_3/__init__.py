"""FlashAttention-3 (upstream's hopper/): one stable-ABI package per platform, CUDA and arch list serving a
range of torch minors. Its protocol implementation is `module`; nothing is imported here (see the
package above)."""
