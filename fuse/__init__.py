"""fuse: placeholder"""
