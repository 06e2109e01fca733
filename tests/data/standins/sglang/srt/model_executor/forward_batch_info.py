import enum


class ForwardMode(enum.IntEnum):
    EXTEND = 1
    DECODE = 2
    TARGET_VERIFY = 3
