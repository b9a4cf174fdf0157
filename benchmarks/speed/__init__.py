"""The speed suite: step time and memory, training throughput, CPU precision."""
