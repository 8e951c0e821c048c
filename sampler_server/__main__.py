from sampler_server.cli.main import main

raise SystemExit(main())
