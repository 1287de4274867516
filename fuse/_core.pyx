# placeholder; the engine lands next
def version():
    return "0.1.0"
