from logbook.cli import main

main()
