"""Adapters that carry Polymorph's promoted kernels into serving stacks and their traffic back."""
