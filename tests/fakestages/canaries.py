from ._fake import make

globals().update(make("canaries"))
