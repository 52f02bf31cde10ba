from table import note, register


def wait(future):
    return future


def run(job):
    note(job(), "made now")


register(wait, "aten::wait")
