def capture_size(size, forward):
    forward(size)
