from tenantd.cli.main import main

main()
