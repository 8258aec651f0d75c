"""Linear ids to (x, y, z) coordinates, as CUDA numbers threads in a block and blocks in a grid (x fastest): shared by
the machine (threads' and blocks' ids) and the race detector (the threads it names in a report)."""


def tuple3(flat, dims):
    """(x, y, z) of linear id `flat` (an int or a numpy array of them) in a (dims[0], dims[1], dims[2]) box."""
    x = flat % dims[0]
    y = (flat // dims[0]) % dims[1]
    z = flat // (dims[0] * dims[1])
    return x, y, z
