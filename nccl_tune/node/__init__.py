"""Checks of the node itself (NVML, processes, sockets, rlimits, disk): is it fit to tune on?"""
