from fedsciml.cli import main

raise SystemExit(main())
