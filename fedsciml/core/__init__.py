"""Pure mathematics: linear algebra, least-squares objectives, curvature, Levenberg–Marquardt, GN statistics,
privacy, sketches and leave-one-client-out CV.  Nothing here imports any other part of fedsciml."""
